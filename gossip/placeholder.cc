// gossip placeholder
