# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Debian packages a test suite needs (Chromium, Prometheus), installed with apt-get when missing.

    install_debian_packages(packages, what)   apt-get update + install, as root; returns the seconds spent

The suites call it only once they found their binaries missing, and fail (never skip) when it cannot
install them: not root, no apt-get, or apt-get failed (its output's end is in the message).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import subprocess
import time

APT_TIMEOUT = 900


class PackageInstallError(RuntimeError):
    """The packages are missing and could not be installed; the message says how to install them."""


def install_debian_packages(packages, what):
    """Install Debian's ``packages`` (``what`` names them for the messages: "Chromium", "Prometheus")."""
    listed = ' '.join(packages)
    if os.geteuid() != 0:
        raise PackageInstallError('%s is not installed and this is not root: install the Debian package(s) %s '
                                  '(apt-get install %s)' % (what, listed, listed))
    if not shutil.which('apt-get'):
        raise PackageInstallError('%s is not installed and apt-get is missing: install %s' % (what, listed))
    started = time.monotonic()
    environment = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
    for command in (['apt-get', 'update', '-q'],
                    ['apt-get', 'install', '-y', '-q', '--no-install-recommends'] + list(packages)):
        result = subprocess.run(command, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=APT_TIMEOUT, check=False)
        if result.returncode != 0:
            raise PackageInstallError('%s failed (exit %d):\n%s' % (' '.join(command), result.returncode,
                                                                    result.stdout.decode('utf-8', 'replace')[-3000:]))
    return time.monotonic() - started
