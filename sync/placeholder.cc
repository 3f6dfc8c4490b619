// sync: placeholder until the real sources land.
