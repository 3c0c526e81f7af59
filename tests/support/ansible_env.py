# -*- coding: utf-8 -*-
# Copyright: gpufleet.mig contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a command with the Ansible settings of this checkout: the Makefile's ANSIBLE_ENV, a prefix as env(1) is.

    python tests/support/ansible_env.py [NAME=VALUE]... COMMAND [ARG]...

The settings are tests/support/playbook.py's ansible_settings(), the definition the tests use too, with the folder
of the interpreter that runs this file (a virtualenv's bin/) first on PATH; then each NAME=VALUE; the rest of the
environment stays as it is. COMMAND replaces this process (its exit status is the command's).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import sys

from playbook import ansible_settings  # beside this file, which is run as a script (its folder is sys.path[0])


def command_environment(argv, environ):
    """(environment, command argv) of ``argv``: ``environ`` with ansible_settings(), then argv's leading NAME=VALUEs."""
    env = dict(environ)
    env.update(ansible_settings())
    argv = list(argv)
    while argv and '=' in argv[0] and not argv[0].startswith('='):
        name, dummy, value = argv.pop(0).partition('=')
        env[name] = value
    return env, argv


def main(argv=None):
    env, command = command_environment(sys.argv[1:] if argv is None else argv, os.environ)
    if not command:
        sys.stderr.write('usage: %s [NAME=VALUE]... COMMAND [ARG]...\n' % sys.argv[0])
        return 2
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        sys.stderr.write('%s: %s: %s\n' % (sys.argv[0], command[0], exc.strerror))
    return 127  # as env(1): the command could not be run


if __name__ == '__main__':
    sys.exit(main())
