"""The live terminal view (Textual)."""
