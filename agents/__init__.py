"""LLM side of kernelpilot: client, roles, context, tree search and the offline proposer."""
