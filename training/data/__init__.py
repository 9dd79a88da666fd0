"""Plain data files for corpus preparation (speaker lists)."""
