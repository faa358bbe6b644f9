"""scripts/check-lifecycle keeps the job's life cycle declared once
(docs/DESIGN.md, "The job's life cycle"): it passes on this tree, and fails
on a copy of it with a write of a job's state outside lib/80-lifecycle.lua's
life-cycle section, with an allowlist entry whose write is gone, or with
a DESIGN chart that is not the one the declaration draws;
scripts/lifecycle-chart draws it again."""

import os
import shutil
import subprocess
import tempfile
import unittest

from dqtest import SRC_DIR, main


class LifecycleRules(unittest.TestCase):
    def setUp(self):
        self.fresh_tree()

    def fresh_tree(self):
        """A copy of the files the scripts read, in self.top."""
        self.top = tempfile.mkdtemp(prefix="dq-lifecycle-")
        self.addCleanup(shutil.rmtree, self.top)
        for d in ("src/store/lua", "scripts"):
            shutil.copytree(os.path.join(SRC_DIR, d), os.path.join(self.top, d))
        os.makedirs(os.path.join(self.top, "docs"))
        shutil.copy(os.path.join(SRC_DIR, "docs/DESIGN.md"), os.path.join(self.top, "docs"))

    def run_script(self, name, *args):
        return subprocess.run(["sh", os.path.join(self.top, "scripts", name), *args, self.top],
                              capture_output=True, text=True)

    def assert_check_fails_saying(self, *texts):
        """check-lifecycle fails on the tree, and its errors say each text."""
        r = self.run_script("check-lifecycle")
        self.assertNotEqual(r.returncode, 0)
        for text in texts:
            self.assertIn(text, r.stderr)

    def edit(self, path, old, new):
        path = os.path.join(self.top, path)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.assertEqual(text.count(old), 1, old)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new))

    def test_the_tree_passes(self):
        r = self.run_script("check-lifecycle")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_direct_write_of_the_state_in_a_converted_file_fails(self):
        # touch goes through transition(); setting the state by hand is
        # what the check is for, whether alone or among other targets
        for write in ("j.state = 'reserved'", "j.due, j.state = due, 'reserved'",
                      "j['state'] = 'reserved'", "local k = {topic = j.topic, state = 'ready'}"):
            with self.subTest(write=write):
                self.fresh_tree()
                self.edit("src/store/lua/touch.lua", "local due = now_ms() + j.ttr\n",
                          "local due = now_ms() + j.ttr\n" + write + "\n")
                self.assert_check_fails_saying("touch.lua", write)

    def test_a_comparison_or_a_reply_is_no_write(self):
        self.edit("src/store/lua/touch.lua", "local due = now_ms() + j.ttr\n",
                  "local due = now_ms() + j.ttr\nassert(j.state == 'reserved')\n"
                  "local answer = reply{state = j.state, due = due}\n")
        r = self.run_script("check-lifecycle")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_an_allowlisted_write_that_is_gone_must_leave_the_list(self):
        # read_job's decoding of the stored state, as if it were done elsewhere
        self.edit("src/store/lua/lib/10-codec.lua", "local j = {state = STATE_NAME[s], due = d,",
                  "local j = {due = d,")
        self.assert_check_fails_saying("is gone", "local j = {state = STATE_NAME[s]")

    def test_a_write_in_a_shared_module_outside_the_life_cycle_fails(self):
        self.edit("src/store/lua/lib/10-codec.lua", "local function job_body(j)\n",
                  "local function job_body(j)\n    j.state = 'ready'\n")
        self.assert_check_fails_saying("10-codec.lua", "j.state = 'ready'")

    def test_the_chart_follows_the_declaration(self):
        self.edit("src/store/lua/lib/80-lifecycle.lua", "hooks = {'store', 'enter_due_set'}, after",
                  "hooks = {'enter_due_set', 'store'}, after")
        self.assert_check_fails_saying("make lifecycle-chart")
        drawn = self.run_script("lifecycle-chart")
        self.assertEqual(drawn.returncode, 0, drawn.stderr)
        with open(os.path.join(self.top, "docs/DESIGN.md"), encoding="utf-8") as f:
            self.assertIn("| `touch` (stays: its own hooks alone) | reserved | reserved | - | enter_due_set, store | - |", f.read())
        r = self.run_script("check-lifecycle")
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    main()
