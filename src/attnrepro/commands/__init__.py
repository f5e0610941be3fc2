"""The stages as commands of the `attnrepro` console entry point (attnrepro.cli), one module each."""
