# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""docs/figures.md, the one page of current figures, written from what the benchmarks and the suites printed
(and its twin on the collection docsite, docs/docsite/rst/figures.rst).

``make benchmark`` prints, before each benchmark's output, a line ``== figures: <name>: <command>`` and, first, the
machine it runs on (``== figures: machine: ...``, from ``figures.py machine``); ``tests/run_suites.sh`` (make test)
ends with ``== suite times (wall)`` and one line per suite. This script reads such logs and writes the page:

    make figures                           (make benchmark, then this script on its output)
    .venv/bin/python benchmarks/figures.py write build/benchmark.log [make-test.log ...]

A section the logs do not hold (a benchmark not run this time) is kept as the page had it, with its own command
and machine: the page is never edited by hand, and a partial run replaces only what it measured.
"""

from __future__ import absolute_import, division, print_function

import argparse
import os
import platform
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, 'docs', 'figures.md')
DOCSITE_PAGE = os.path.join(REPO, 'docs', 'docsite', 'rst', 'figures.rst')

# The page's sections, in order: (name, title, what the figures say).
SECTIONS = (
    ('planner', 'Planner', 'The planner beside clear-all-and-recreate (what mig-parted does) and the '
     'brute-force minimum on a corpus of transitions with busy instances; the cost of a no-op.'),
    ('fragmentation', 'Fragmentation', 'Stranded slices under first-fit, planned placement, scheduled repacking and '
     'the demand planner\'s placement, per GPU model.'),
    ('demand', 'Demand', 'Requests placed by a static layout, the day/night schedule, a model of dynamic MIG, the '
     'demand paths and the gated queue as the rulebook ships them, and two ceilings without placement rules, over '
     'several seeds.'),
    ('advisor', 'Advisor', 'The advised catalog and schedule beside static all-balanced and day/night, on the week '
     'advised from and on the next one.'),
    ('rollout', 'Rollout', 'A no-op and a switch of playbooks/mig_layout.yml beside `ansible -m ping`: wall time and '
     'module executions per host.'),
    ('report', 'Report', 'The fleet MIG map of 1000 hosts x 8 GPUs inside ansible-playbook, read live and from the fact '
     'cache: bytes, wall time and memory beside a ping.'),
    ('suites', 'Test suite times', 'Each suite\'s wall time in `make test` (tests/run_suites.sh), and the total.'),
)
NAMES = tuple(name for name, dummy, dummy in SECTIONS)
SUITES_COMMAND = 'make test'

MARKER = re.compile(r'^== figures: (?P<name>[a-z]+): (?P<value>.*)$')
SUITE_TIMES = '== suite times (wall)'
SUITE_LINE = re.compile(r'^(?P<suite>[a-z][a-z0-9-]*)\s+(?P<seconds>\d+)s\b')
# On the page: <!-- figures: NAME --> ... <!-- /figures: NAME -->, holding the command, the machine and the output.
PAGE_SECTION = re.compile(r'<!-- figures: (?P<name>[a-z]+) -->\n(?P<body>.*?)\n<!-- /figures: (?P=name) -->', re.DOTALL)
PAGE_FIELD = re.compile(r'^(?P<field>Command|Machine): `(?P<value>[^`]*)`$', re.MULTILINE)
PAGE_OUTPUT = re.compile(r'^```text\n(?P<output>.*?)^```$', re.MULTILINE | re.DOTALL)


class FiguresError(ValueError):
    """A log or a page this script cannot read: one line that says where."""


class Figures(object):
    """One section's figures: the command that printed them, the machine it ran on, the output as printed."""

    def __init__(self, name, command, machine, output):
        if name not in NAMES:
            raise FiguresError('unknown figures section %r (known: %s)' % (name, ', '.join(NAMES)))
        self.name, self.command, self.machine, self.output = name, command, machine, output.strip('\n')

    def __eq__(self, other):
        return isinstance(other, Figures) and vars(self) == vars(other)

    def __repr__(self):
        return 'Figures(%r, %r, %r, %d lines)' % (self.name, self.command, self.machine, len(self.output.splitlines()))


def machine_description():
    """The machine a run measures on, in one line: CPU model, cores, OS, Python."""
    model = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as cpuinfo:
            names = [line.split(':', 1)[1].strip() for line in cpuinfo if line.startswith('model name')]
        model = names[0] if names else model
    except (IOError, OSError):
        pass
    # A shared machine's other work shows in its load: said beside the figures, which it slows.
    load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')
    return '%s, %d cores, load %.1f at start, %s %s, Python %s' % (
        model, os.cpu_count() or 1, load, platform.system(), platform.release(), platform.python_version())


def parse_log(text):
    """The Figures a log holds: make benchmark's sections (after its machine line), make test's suite times.

    A section runs from its marker to the next marker (or the suite times, or the end). A later section of the
    same name replaces an earlier one (the last run counts)."""
    found = {}
    machine = None
    current = None
    lines = []

    def close():
        if current is not None:
            if machine is None:
                raise FiguresError('the figures of %s come before any "== figures: machine:" line' % current[0])
            found[current[0]] = Figures(current[0], current[1], machine, '\n'.join(lines))

    text_lines = text.splitlines()
    index = 0
    while index < len(text_lines):
        line = text_lines[index]
        marker = MARKER.match(line)
        if marker and marker.group('name') == 'machine':
            close()
            current, lines = None, []
            machine = marker.group('value').strip()
        elif marker:
            close()
            current, lines = (marker.group('name'), marker.group('value').strip()), []
            if current[0] not in NAMES:
                raise FiguresError('unknown figures section %r in the log (known: %s)' % (current[0], ', '.join(NAMES)))
        elif line.strip() == SUITE_TIMES:
            close()
            current, lines = None, []
            suites = []
            index += 1
            while index < len(text_lines) and SUITE_LINE.match(text_lines[index]):
                suites.append(text_lines[index].rstrip())
                index += 1
            if not suites:
                raise FiguresError('"%s" is followed by no suite time' % SUITE_TIMES)
            found['suites'] = Figures('suites', SUITES_COMMAND, machine or machine_description(), '\n'.join(suites))
            continue
        elif current is not None:
            lines.append(line.rstrip())
        index += 1
    close()
    return found


def parse_page(text):
    """The Figures the page holds, by section name."""
    found = {}
    for section in PAGE_SECTION.finditer(text):
        fields = dict((match.group('field'), match.group('value')) for match in PAGE_FIELD.finditer(section.group('body')))
        output = PAGE_OUTPUT.search(section.group('body'))
        if set(fields) != {'Command', 'Machine'} or output is None:
            raise FiguresError('section %s of the figures page has no Command, Machine and output block'
                               % section.group('name'))
        found[section.group('name')] = Figures(section.group('name'), fields['Command'], fields['Machine'],
                                               output.group('output'))
    return found


def render_page(figures):
    """The page, every section of SECTIONS in order; one with no figures says how to get them."""
    out = ['# Figures', '',
           'Every figure the collection\'s documentation quotes, each with the command that prints it and the machine it',
           'ran on. The README and the guides link here instead of copying numbers. This page is written by',
           '`benchmarks/figures.py` from the output of `make benchmark` (and of `make test` for the suite times):',
           'run `make figures` to measure again; a section that was not measured again keeps its figures. Do not edit',
           'it by hand.', '']
    for name, title, what in SECTIONS:
        out += ['## %s' % title, '', what, '']
        section = figures.get(name)
        if section is None:
            out += ['Not measured yet: run `make figures`.', '']
            continue
        if '`' in section.command or '`' in section.machine:
            raise FiguresError('the command or machine of %s holds a backquote' % name)
        out += ['<!-- figures: %s -->' % name,
                'Command: `%s`' % section.command, '',
                'Machine: `%s`' % section.machine, '',
                '```text', section.output, '```',
                '<!-- /figures: %s -->' % name, '']
    return '\n'.join(out)


def render_docsite_page(figures):
    """The same page for the collection docsite (an extra doc of docs/docsite/extra-docs.yml, reStructuredText)."""
    out = ['.. _ansible_collections.gpufleet.mig.docsite.figures:', '', 'Figures', '=======', '',
           'Every figure the guides quote, each with the command that prints it and the machine it ran on. Written',
           'with ``docs/figures.md`` by ``benchmarks/figures.py`` from the output of ``make benchmark`` (and of',
           '``make test`` for the suite times): run ``make figures`` to measure again. Do not edit it by hand.', '']
    for name, title, what in SECTIONS:
        out += [title, '-' * len(title), '', what.replace('`', '``'), '']
        section = figures.get(name)
        if section is None:
            out += ['Not measured yet: run ``make figures``.', '']
            continue
        out += ['Command: ``%s``' % section.command, '', 'Machine: ``%s``' % section.machine, '',
                '.. code-block:: text', '']
        out += [('    ' + line) if line.strip() else '' for line in section.output.splitlines()]
        out += ['']
    return '\n'.join(out)


def write_page(logs, page=PAGE, docsite_page=DOCSITE_PAGE):
    """Rewrite the page (and its docsite twin) with the figures of ``logs`` (their texts), keeping the sections
    they do not hold."""
    figures = {}
    if os.path.exists(page):
        with open(page) as handle:
            figures.update(parse_page(handle.read()))
    for text in logs:
        figures.update(parse_log(text))
    with open(page, 'w') as handle:
        handle.write(render_page(figures))
    if docsite_page:
        with open(docsite_page, 'w') as handle:
            handle.write(render_docsite_page(figures))
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description='Write docs/figures.md from make benchmark and make test output.')
    commands = parser.add_subparsers(dest='command')
    commands.add_parser('machine', help='print the "== figures: machine:" line for a benchmark log')
    write = commands.add_parser('write', help='rewrite the page from logs')
    write.add_argument('logs', nargs='+')
    write.add_argument('--page', default=PAGE)
    write.add_argument('--docsite-page', default=DOCSITE_PAGE, help='its docsite twin; "" writes none')
    options = parser.parse_args(argv)
    if options.command == 'machine':
        print('== figures: machine: %s' % machine_description())
        return 0
    if options.command != 'write':
        parser.error('say machine or write')
    texts = []
    for path in options.logs:
        with open(path) as handle:
            texts.append(handle.read())
    try:
        figures = write_page(texts, options.page, options.docsite_page)
    except FiguresError as error:
        sys.exit('figures.py: %s' % error)
    print('%s: %s' % (os.path.relpath(options.page), ', '.join(name for name in NAMES if name in figures)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
