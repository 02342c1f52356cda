"""A small shop: users register, get a welcome email, and a nightly job tidies up."""
