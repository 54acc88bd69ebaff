"""Where grading is delivered: Gradescope's autograder and its zip, the submission service."""
