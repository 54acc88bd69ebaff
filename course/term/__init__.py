"""A class and its term: batches and shards, the class summary, nbgrader's gradebook and files, rosters, LMS."""
