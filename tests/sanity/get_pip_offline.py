# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Stand-in for ansible-test's pip bootstrap script where its download host is unreachable.

ansible-test runs this in an empty virtualenv with pip install options and the packages
to install (``pip==X``). Python's bundled pip (ensurepip, no network) is installed first,
then it installs those packages from the configured package index.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import subprocess
import sys

# get-pip options that plain "pip install" does not know
_GET_PIP_ONLY_OPTIONS = ('--no-setuptools', '--no-wheel')


def main():
    # in a child process: ensurepip points PIP_CONFIG_FILE at /dev/null in its own environment
    status = subprocess.call([sys.executable, '-m', 'ensurepip', '--upgrade', '--default-pip'])
    if status:
        return status
    arguments = [argument for argument in sys.argv[1:] if argument not in _GET_PIP_ONLY_OPTIONS]
    return subprocess.call([sys.executable, '-m', 'pip', 'install'] + arguments)


if __name__ == '__main__':
    sys.exit(main())
