"""Tuning records below selection: the JSON Lines store (store), the keys that match a record
to a call, a device and a template version (keys), and the rules that turn matching records
into tuned choices (apply). The tuner (gpucg.autotune) writes them; selection
(gpucg.strategy) reads them, so they sit under both.
"""
