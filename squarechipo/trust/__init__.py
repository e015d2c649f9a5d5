"""Trust: this account's machine folder, its signing and trusted keys, and the seals every record carries."""
