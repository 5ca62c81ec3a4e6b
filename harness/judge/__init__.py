"""The judging, on the trusted side: outputs compared, the verdict, and the acceptance rule."""
