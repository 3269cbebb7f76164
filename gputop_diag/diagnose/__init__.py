"""The bottleneck classifier: pure functions from a window of snapshots to a diagnosis.

`classify.classify(window, previous, scheduler)` names the bottleneck and attaches the alerts;
`history` keeps the window it reads. No I/O, no clock, no Textual.
"""
