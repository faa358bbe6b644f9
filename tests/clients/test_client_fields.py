#!/usr/bin/env python3
"""The clients' add options against the server's command table: the job
fields add takes are declared once (src/protocol/commands.def's
DQ_JOB_FIELDS, named in fields.def), and the Python client's add()
keywords and the PHP and Node.js clients' ADD_OPTIONS must name exactly those (less
topic and body, which they take as arguments, and TTR, the one synonym).
A field added to the table and not to a client, or the reverse, fails
here. No deployment: it reads the files.

Run: DELAYQ_SRC_DIR=. python3 tests/clients/test_client_fields.py
"""

import inspect
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC_DIR = os.environ.get("DELAYQ_SRC_DIR") or os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC_DIR, "clients", "python"))

import delayq  # noqa: E402

POSITIONAL = {"topic", "body"}
SYNONYMS = {"TTR"}


def read(*path):
    with open(os.path.join(SRC_DIR, *path), encoding="utf-8") as f:
        return f.read()


def job_fields():
    """The wire names of DQ_JOB_FIELDS."""
    names = dict(re.findall(r'^DQ_FIELD\((\w+),\s*"([^"]+)"\)', read("src", "protocol",
                                                                      "fields.def"), re.M))
    macro = re.search(r"#define DQ_JOB_FIELDS((?:.*\\\n)*.*)", read("src", "protocol",
                                                                     "commands.def")).group(1)
    return {names[e] for e in re.findall(r"FB\((\w+)\)", macro)}


class ClientAddOptions(unittest.TestCase):
    def setUp(self):
        self.wanted = job_fields() - POSITIONAL - SYNONYMS
        self.assertIn("id", self.wanted)  # the table was read

    def test_python_add_keywords(self):
        params = set(inspect.signature(delayq.Client.add).parameters) - {"self"}
        self.assertEqual(params - POSITIONAL, self.wanted)

    def test_php_add_options(self):
        m = re.search(r"private const ADD_OPTIONS = \[([^\]]*)\];",
                      read("clients", "php", "src", "Client.php"))
        self.assertIsNotNone(m, "ADD_OPTIONS not found in Client.php")
        self.assertEqual(set(re.findall(r"'([^']+)'", m.group(1))), self.wanted)

    def test_node_add_options(self):
        m = re.search(r"^const ADD_OPTIONS = \[([^\]]*)\];",
                      read("clients", "node", "src", "client.js"), re.M)
        self.assertIsNotNone(m, "ADD_OPTIONS not found in clients/node/src/client.js")
        self.assertEqual(set(re.findall(r"'([^']+)'", m.group(1))), self.wanted)


if __name__ == "__main__":
    unittest.main(verbosity=2)
