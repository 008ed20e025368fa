"""Developer tools run from the repository's root; not installed with the package."""
