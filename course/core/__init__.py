"""The base every layer stands on: errors, text made safe, atomic files, settings, status words, logs."""
