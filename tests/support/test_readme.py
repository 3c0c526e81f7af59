# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""README.md as users and CI read it: the quick start's two commands are make targets, CI runs the test command it
gives, every file it links exists, and no line runs past 300 characters."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from .playbook import REPO

with open(os.path.join(REPO, 'README.md')) as _handle:
    README = _handle.read()


def quick_start_commands():
    section = README.split('## Quick start', 1)[1].split('\n## ', 1)[0]
    block = re.search(r'```console\n(.*?)```', section, re.DOTALL).group(1)
    return [line.split('#', 1)[0].strip() for line in block.splitlines() if line.strip() and not line.startswith(' ')]


def test_the_quick_start_gives_the_main_job_and_the_tests():
    assert quick_start_commands() == ['make demo', 'make test']


def test_ci_runs_the_test_command_the_readme_gives():
    with open(os.path.join(REPO, '.ci', 'run')) as handle:
        commands = [line.strip() for line in handle if line.strip() and not line.startswith(('#', 'set ', 'cd '))]
    assert commands == [quick_start_commands()[1]]


def test_every_file_the_readme_links_exists():
    targets = re.findall(r'\]\(([^)#\s]+)(?:#[^)]*)?\)', README)
    assert targets
    missing = [target for target in targets if '://' not in target and not os.path.exists(os.path.join(REPO, target))]
    assert missing == []


def test_no_readme_line_runs_past_300_characters():
    assert [number for number, line in enumerate(README.splitlines(), 1) if len(line) > 300] == []
