"""GitHub side of kernelpilot: the command line, reports, and (later) events and pull requests."""
