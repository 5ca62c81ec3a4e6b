"""The pull-request flow: may its code run, measure, and publish what was checked."""
