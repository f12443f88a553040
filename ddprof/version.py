"""The package's version: a leaf module (it imports nothing), so that what needs the version — the store's
manifest, the CLI, the Perfetto export, the collectors — does not import the package's ``__init__`` and,
through it, everything the public face names. ``pyproject.toml`` reads it from here."""

__version__ = "0.1.0"
