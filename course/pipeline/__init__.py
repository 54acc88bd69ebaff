"""One submission, from notebook to feedback: the assignment model, reading, judging, feedback."""
