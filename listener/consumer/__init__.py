"""consumer."""
