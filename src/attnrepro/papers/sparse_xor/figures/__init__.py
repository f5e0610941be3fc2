"""Paper A's figures, one module each (named after the figure), and the helpers they share (common)."""
