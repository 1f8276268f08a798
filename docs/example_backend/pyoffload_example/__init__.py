"""pyoffload's example backend: see ``plugin`` (the hooks) and ``docs/plugin-guide.md``."""
