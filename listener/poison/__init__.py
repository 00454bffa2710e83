"""poison."""
