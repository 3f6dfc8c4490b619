// sim: placeholder until the real sources land.
