"""What runs while operators are registered and called."""
