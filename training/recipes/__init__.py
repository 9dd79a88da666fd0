"""Data recipes that build training corpora from what installs offline (see synth_corpus)."""
