"""Names kept for code written for the seed system: see scaler.utility.exceptions."""
