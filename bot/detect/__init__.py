"""Change detection: the nn.Module classes a base...head diff touches."""
