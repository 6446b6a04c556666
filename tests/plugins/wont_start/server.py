"""A test capability that fails before it can answer initialize."""

import sys

sys.stderr.write("wont_start: missing configuration, giving up\n")
sys.exit(7)
