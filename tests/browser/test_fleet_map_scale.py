# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet MIG map of 1000 hosts x 8 GPUs: at most 5 MB, drawn whole by headless Chromium.

The size is deterministic and asserted. The render time is measured and printed, never asserted (the
project forbids timed assertions); docs/fragmentation.md records the figure against the 3 s goal.
"""

from __future__ import absolute_import, division, print_function

import time

import pytest

from ansible_collections.gpufleet.mig.plugins.filter.mig_fleet_map import mig_fleet_map
from ansible_collections.gpufleet.mig.tests.browser.cdp import Chromium, ensure_chromium
from ansible_collections.gpufleet.mig.tests.browser.test_fleet_map_browser import WINDOW, _report
from ansible_collections.gpufleet.mig.tests.unit.plugins.filter.fleet_samples import large_fleet

HOSTS = 1000
GPUS_PER_HOST = 8
SIZE_LIMIT = 5 * 1000 * 1000

MEASURE = r'''
(async () => {
  const navigation = performance.getEntriesByType('navigation')[0];
  const listed = document.querySelectorAll('section.host').length;
  // scroll to the hosts as a reader would: the hosts in view get drawn
  const scrolled = performance.now();
  document.getElementById('hosts').scrollIntoView();
  while (!document.querySelector('article.gpu') && performance.now() - scrolled < 20000) {
    await new Promise(resolve => requestAnimationFrame(resolve));
  }
  const scrollDrawMs = performance.now() - scrolled;
  const first = document.querySelector('article.gpu');
  return {
    listed, scrollDrawMs,
    rendered: document.body.dataset.rendered, renderMs: Number(document.body.dataset.renderMs),
    loadMs: navigation.loadEventEnd, gpus: document.querySelectorAll('article.gpu').length,
    hosts: document.querySelectorAll('section.host').length, blocks: document.querySelectorAll('li.block').length,
    attention: document.querySelectorAll('#attention-table tbody tr').length,
    first: first ? [first.dataset.host, first.dataset.gpu, first.querySelectorAll('li.block').length] : null,
    drawnHosts: document.querySelectorAll('section.host[data-drawn="true"]').length,
  };
})()
'''

DRAW_ALL = r'''
(() => {
  const started = performance.now();
  window.gpufleetMigMap.drawAll();
  const drawn = performance.now();
  document.body.getBoundingClientRect();   // and lay the whole page out
  return {drawMs: drawn - started, layoutMs: performance.now() - drawn, gpus: document.querySelectorAll('article.gpu').length,
          blocks: document.querySelectorAll('li.block').length};
})()
'''


@pytest.fixture(scope='module')
def large_map(request, tmp_path_factory):
    started = time.monotonic()
    fleet = large_fleet(HOSTS, GPUS_PER_HOST)
    built = time.monotonic()
    page = mig_fleet_map(fleet, 'MIG fleet map', 'scale test')
    drawn = time.monotonic()
    path = tmp_path_factory.mktemp('fleet-map-scale') / 'fleet-map.html'
    path.write_text(page, encoding='utf-8')
    binary, dummy = ensure_chromium()
    with Chromium(binary, window=WINDOW, timeout=120.0) as browser:
        loading = time.monotonic()
        session, requests = browser.open_page(path.as_uri())
        # open_page waits 300 ms after the load event for late requests: not part of the render
        load_seconds = time.monotonic() - loading - 0.3
        measured = browser.evaluate(session, MEASURE)
        measured['all'] = browser.evaluate(session, DRAW_ALL)
    size = len(page.encode('utf-8'))
    _report(request.config, '\nfleet map scale: %d hosts x %d GPUs, %.2f MB; filter %.1f s (sample built in %.1f s); '
                            'Chromium: load event %.0f ms after navigation (inline script %d ms), navigate-to-load %.2f s; '
                            'scrolled to the hosts, %d drawn in %.0f ms; drawing every GPU %.0f ms more, laying it out '
                            '%.0f ms' % (HOSTS, GPUS_PER_HOST, size / 1e6, drawn - built, built - started,
                                         measured['loadMs'], measured['renderMs'], load_seconds, measured['drawnHosts'],
                                         measured['scrollDrawMs'], measured['all']['drawMs'], measured['all']['layoutMs']))
    return {'fleet': fleet, 'size': size, 'measured': measured, 'requests': requests, 'url': path.as_uri()}


def test_a_thousand_hosts_fit_in_five_megabytes(large_map):
    assert large_map['size'] <= SIZE_LIMIT


def test_the_browser_lists_every_host_and_draws_the_first_at_once(large_map):
    measured = large_map['measured']
    assert measured['rendered'] == 'true' and measured['renderMs'] >= 0
    assert measured['listed'] == measured['hosts'] == HOSTS
    assert 0 < measured['drawnHosts'] < HOSTS and measured['gpus'] == measured['drawnHosts'] * GPUS_PER_HOST
    assert measured['first'] == ['gpu-node-0000.dc1.example.com', '0', 8]   # 7x1g and slice 7


def test_every_gpu_is_drawn_on_demand(large_map):
    drawn = large_map['measured']['all']
    assert drawn['gpus'] == HOSTS * GPUS_PER_HOST
    # every slice of every GPU with MIG is one block or part of one; MIG-disabled GPUs are one block each
    assert drawn['blocks'] > HOSTS * GPUS_PER_HOST * 2
    assert large_map['requests'] == [large_map['url']]


def test_the_attention_list_names_what_the_sample_breaks(large_map):
    """Every tenth host mixes out-of-layout, churned, unmatched and MIG-pending GPUs; the others are all in layout."""
    assert 0 < large_map['measured']['attention'] < HOSTS * GPUS_PER_HOST // 10
