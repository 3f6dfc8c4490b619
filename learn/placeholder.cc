// learn: placeholder until the real sources land.
