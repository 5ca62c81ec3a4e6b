"""What runs inside the workers, beside the code they run: the reference, candidate, comparator,
timing and baseline workers, and the defences around candidate calls."""
