// daemon: placeholder until the real sources land.
