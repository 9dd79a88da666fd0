"""Plain data files shipped with the library (phone foldings)."""
