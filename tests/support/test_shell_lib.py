# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""tests/support/lib.sh, the test scripts' shell library (tests/cluster/*.sh, tests/fleet/fleet.sh), sourced by bash
under `set -euo pipefail` as the scripts do; apt-get is a stand-in on PATH that records its calls."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess

from .playbook import REPO

LIB = os.path.join(REPO, 'tests', 'support', 'lib.sh')
BASH = shutil.which('bash')
# The stand-in apt-get: each call as one line "ARGS | policy-rc.d's exit status | DEBIAN_FRONTEND"; an install fails
# while the file "stale" exists (a package list that apt-get update brings up to date removes it).
APT_GET = r'''#!/bin/bash
status=none
[[ -x "$POLICY_RC" ]] && { "$POLICY_RC"; status=$?; }
echo "$* | $status | ${DEBIAN_FRONTEND:-}" >>"$CALLS"
echo "apt-get's own output"
case $1 in
    update) rm -f "$STALE" ;;
    install) [[ ! -e "$STALE" ]] ;;
esac
'''


def bash(tmp_path, script, apt_get=True, system_path=True):
    """Run ``script`` after sourcing the library as a test script does, with bin/ (the stand-in apt-get) first on
    PATH, then the system's folders unless ``system_path`` is false; returns the CompletedProcess."""
    bin_dir = tmp_path / 'bin'
    bin_dir.mkdir(exist_ok=True)
    if apt_get:
        (bin_dir / 'apt-get').write_text(APT_GET)
        (bin_dir / 'apt-get').chmod(0o755)
    env = dict(os.environ, PATH=str(bin_dir) + (':/usr/sbin:/usr/bin:/sbin:/bin' if system_path else ''), CALLS=str(tmp_path / 'calls'),
               STALE=str(tmp_path / 'stale'), POLICY_RC=str(tmp_path / 'policy-rc.d'))
    program = 'set -euo pipefail\nlog_tag=fleet\n. "%s"\npolicy_rc=$POLICY_RC\n%s\necho reached the end\n' % (LIB, script)
    return subprocess.run([BASH, '-c', program], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60, check=False)


def calls(tmp_path):
    path = tmp_path / 'calls'
    return path.read_text().splitlines() if path.exists() else []


def test_log_and_die_write_one_tagged_line_on_stderr_and_die_ends_the_script(tmp_path):
    done = bash(tmp_path, 'log "two words"\ndie "it broke"')
    assert (done.returncode, done.stdout, done.stderr) == (1, '', '[fleet] two words\n[fleet] ERROR: it broke\n')


def test_apt_install_installs_while_no_service_may_start_and_removes_the_policy_afterwards(tmp_path):
    done = bash(tmp_path, 'apt_install openssh-server runc')
    assert done.returncode == 0 and done.stdout == 'reached the end\n', done.stderr
    assert calls(tmp_path) == ['install -y -q --no-install-recommends openssh-server runc | 101 | noninteractive']
    assert done.stderr == "[fleet] installing openssh-server runc\napt-get's own output\n"
    assert not (tmp_path / 'policy-rc.d').exists()


def test_apt_install_updates_the_package_lists_only_when_the_install_fails_without(tmp_path):
    (tmp_path / 'stale').write_text('')
    done = bash(tmp_path, 'apt_install containerd')
    assert done.returncode == 0, done.stderr
    install = 'install -y -q --no-install-recommends containerd | 101 | noninteractive'
    assert calls(tmp_path) == [install, 'update -q | 101 | noninteractive', install]


def test_apt_install_keeps_a_policy_it_did_not_write(tmp_path):
    (tmp_path / 'policy-rc.d').write_text('#!/bin/sh\nexit 104\n')
    (tmp_path / 'policy-rc.d').chmod(0o755)
    done = bash(tmp_path, 'apt_install runc')
    assert done.returncode == 0, done.stderr
    assert calls(tmp_path) == ['install -y -q --no-install-recommends runc | 104 | noninteractive']
    assert (tmp_path / 'policy-rc.d').read_text() == '#!/bin/sh\nexit 104\n'


def test_apt_install_dies_when_the_install_fails(tmp_path):
    bash(tmp_path, 'true')
    (tmp_path / 'bin' / 'apt-get').write_text('#!/bin/sh\nexit 100\n')
    done = bash(tmp_path, 'apt_install runc', apt_get=False)
    assert done.returncode == 1 and done.stdout == '', done.stdout
    assert done.stderr == '[fleet] installing runc\n[fleet] ERROR: could not install runc\n'
    assert not (tmp_path / 'policy-rc.d').exists()


def test_apt_install_dies_when_there_is_no_apt_get(tmp_path):
    done = bash(tmp_path, 'apt_install runc', apt_get=False, system_path=False)
    assert (done.returncode, done.stdout) == (1, '')
    assert done.stderr == '[fleet] ERROR: missing runc and there is no apt-get: install them\n'
