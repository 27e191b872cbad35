"""These tests run against the installed client (python3 -m pip install
./clients/python), never the source folder beside them: a module the build
leaves out of the wheel must fail here, not hide behind the source tree."""

from __future__ import annotations

import importlib.metadata
import os
import unittest

import turnstile

SOURCE = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "turnstile"))


class InstalledTest(unittest.TestCase):
    def test_the_client_is_the_installed_distribution_of_this_source(self) -> None:
        imported = os.path.realpath(os.path.dirname(turnstile.__file__))
        self.assertNotEqual(imported, SOURCE, "turnstile was imported from the source folder, not installed")
        dist = importlib.metadata.distribution("turnstile-client")
        self.assertEqual(os.path.realpath(str(dist.locate_file("turnstile"))), imported,
                         "the imported turnstile is the one the turnstile-client distribution installed")
        installed = {str(f) for f in dist.files or [] if str(f).startswith("turnstile/") and str(f).endswith(".py")}
        source = set()
        for dirpath, dirnames, filenames in os.walk(SOURCE):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            rel = os.path.relpath(dirpath, SOURCE).replace(os.sep, "/")
            prefix = "turnstile/" if rel == "." else f"turnstile/{rel}/"
            source |= {prefix + name for name in filenames if name.endswith(".py")}
        self.assertIn("turnstile/participant/__init__.py", source, "the participant library is part of the client")
        self.assertEqual(installed, source, "every module of the source, and only those, is installed")
        for path in sorted(source):
            rel = path[len("turnstile/"):]
            with open(os.path.join(SOURCE, *rel.split("/")), "rb") as a, \
                    open(os.path.join(imported, *rel.split("/")), "rb") as b:
                self.assertEqual(a.read(), b.read(), f"{path} changed since the install: install the client again")


if __name__ == "__main__":
    unittest.main()
