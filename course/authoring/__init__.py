"""What an instructor writes and releases: the release and its proof, the authoring kit."""
