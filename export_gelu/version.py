"""The version of export-gelu (CHANGELOG.md says what each one changed for users)."""

__version__ = "0.5.0"
