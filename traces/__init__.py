"""traces package."""
