"""One module per pane of the main screen."""
