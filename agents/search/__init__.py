"""The search over candidates: a tree rooted at the reference, and how a node is selected."""
