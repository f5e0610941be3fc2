"""Paper B's figures, one module each (named after the figure; a figure whose claims run long keeps
them in <figure>_claims), and the helpers they share (common)."""
