# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet MIG map as a browser renders it: headless Chromium, asserted through the DevTools Protocol.

Run: PYTHONPATH=build/collections .venv/bin/python -m pytest -q -p no:cacheprovider tests/browser
Installs Debian's chromium with apt-get when it is missing (as root) and fails, never skips,
when it cannot. Keeps the page and a full-page screenshot under build/artifacts/ (or
$GPUFLEET_ARTIFACTS_DIR) and prints where, with the time each step took.
"""

from __future__ import absolute_import, division, print_function

import os
import struct
import time
import zlib

import pytest

from ansible_collections.gpufleet.mig.plugins.filter.mig_fleet_map import mig_fleet_map
from ansible_collections.gpufleet.mig.tests.browser.cdp import Chromium, ensure_chromium
from ansible_collections.gpufleet.mig.tests.unit.plugins.filter.fleet_samples import sample_fleet

REPOSITORY = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
ARTIFACTS = os.environ.get('GPUFLEET_ARTIFACTS_DIR') or os.path.join(REPOSITORY, 'build', 'artifacts')
WINDOW = (1280, 900)
NARROW_WIDTH = 640   # a phone or a split screen: labels must still fit

# Worked out by hand from the sample fleet (an independent check of the drawing):
# 7 x 1g leave slice 7 with nothing that fits; 1g at 4 and 6 block every placement over 7.
# Slice 7 of gpu-a100-01 GPU 1 (7x1g) is unusable, not stranded: every compute slice is taken.
EXPECTED_STRANDED = {
    ('gpu-a100-01', 0): [7],
    ('gpu-h200-01', 0): [7],
}

DOM_SNAPSHOT = r'''
(() => {
  // The page draws a host's GPUs as it nears the viewport and lets the browser skip off-screen hosts
  // (content-visibility): that keeps a large fleet fast. Draw and lay out every host to measure them all.
  window.gpufleetMigMap.drawAll();
  document.querySelectorAll('section.host').forEach(section => { section.style.contentVisibility = 'visible'; });
  const box = el => { const r = el.getBoundingClientRect(); return {left: r.left, top: r.top, width: r.width, height: r.height}; };
  const gpus = [...document.querySelectorAll('article.gpu')].map(gpu => {
    const bar = gpu.querySelector('ol.slices');
    const outer = bar.getBoundingClientRect();
    return {
      host: gpu.dataset.host, gpu: Number(gpu.dataset.gpu), uuid: gpu.dataset.uuid, mig: gpu.dataset.mig,
      stranded: Number(gpu.dataset.strandedSlices || 0),
      totalSlices: Number(bar.dataset.totalSlices),
      inner: {left: outer.left + bar.clientLeft, width: bar.clientWidth},
      visible: outer.width > 0 && outer.height > 0,
      blocks: [...bar.children].map(block => {
        const style = getComputedStyle(block);
        const profile = block.querySelector('.profile');
        return {
          state: block.dataset.state, start: Number(block.dataset.start), size: Number(block.dataset.size),
          box: box(block), text: block.innerText, title: block.title,
          background: style.backgroundImage + ' ' + style.backgroundColor,
          clippedVertically: block.scrollHeight > block.clientHeight + 1,
          profileClipped: profile ? profile.scrollWidth > profile.clientWidth + 1 : false,
        };
      }),
    };
  });
  const totals = {};
  document.querySelectorAll('[data-total]').forEach(e => { totals[e.dataset.total] = Number(e.querySelector('dd').textContent); });
  return {gpus, totals, title: document.title, scrollWidth: document.documentElement.scrollWidth, viewport: innerWidth};
})()
'''

PROBE_PAGE = '''<!DOCTYPE html><html><head><meta charset="utf-8"><title>probe</title>
<link rel="stylesheet" href="https://fleet-map-probe.invalid/style.css"></head>
<body><img src="http://fleet-map-probe.invalid/pixel.png" alt="probe"></body></html>
'''


def _report(config, line):
    """Print past pytest's output capture, so the timings show in a plain run."""
    capture = config.pluginmanager.getplugin('capturemanager')
    if capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        print(line)


@pytest.fixture(scope='module')
def rendered(request, tmp_path_factory):
    """The sample fleet's map loaded in Chromium: DOM figures, request logs and a screenshot (browser closed after)."""
    started = time.monotonic()
    fleet = sample_fleet()
    directory = tmp_path_factory.mktemp('fleet-map')
    page = directory / 'fleet-map.html'
    page.write_text(mig_fleet_map(fleet, 'MIG fleet map', 'sample fleet for the browser test'), encoding='utf-8')
    probe = directory / 'probe.html'
    probe.write_text(PROBE_PAGE, encoding='utf-8')
    binary, install_seconds = ensure_chromium()
    launched = time.monotonic()
    with Chromium(binary, window=WINDOW) as browser:
        browser_seconds = time.monotonic() - launched
        loading = time.monotonic()
        session, requests = browser.open_page(page.as_uri())
        load_seconds = time.monotonic() - loading
        dom = browser.evaluate(session, DOM_SNAPSHOT)
        screenshot = browser.screenshot(session)
        narrow_session, dummy = browser.open_page(page.as_uri(), width=NARROW_WIDTH)
        narrow_dom = browser.evaluate(narrow_session, DOM_SNAPSHOT)
        dummy, probe_requests = browser.open_page(probe.as_uri())
    if not os.path.isdir(ARTIFACTS):
        os.makedirs(ARTIFACTS)
    screenshot_path = os.path.join(ARTIFACTS, 'fleet-map.png')
    with open(screenshot_path, 'wb') as handle:
        handle.write(screenshot)
    with open(os.path.join(ARTIFACTS, 'fleet-map.html'), 'w') as handle:
        handle.write(page.read_text(encoding='utf-8'))
    _report(request.config, '\nfleet map browser test: chromium install %.1f s, browser start %.1f s, page load %.2f s, '
                            'total %.1f s; screenshot %s' % (install_seconds, browser_seconds, load_seconds,
                                                             time.monotonic() - started, screenshot_path))
    return {'fleet': fleet, 'url': page.as_uri(), 'dom': dom, 'narrow_dom': narrow_dom, 'requests': requests, 'probe_url': probe.as_uri(),
            'probe_requests': probe_requests, 'screenshot': screenshot}


def test_every_gpu_is_drawn(rendered):
    expected = sorted((host['host'], gpu['index'], gpu['uuid']) for host in rendered['fleet'] for gpu in host['gpus'])
    drawn = sorted((g['host'], g['gpu'], g['uuid']) for g in rendered['dom']['gpus'])
    assert drawn == expected
    assert all(g['visible'] for g in rendered['dom']['gpus'])
    states = dict(((g['host'], g['gpu']), g['mig']) for g in rendered['dom']['gpus'])
    assert states[('gpu-a100-01', 2)] == 'disabled' and states[('inference-l40s-01', 0)] == 'unsupported'
    assert rendered['dom']['title'] == 'MIG fleet map'
    assert rendered['dom']['totals']['gpus'] == len(expected)


def test_blocks_are_as_wide_as_the_slices_they_cover(rendered):
    slice_widths = {}
    checked = 0
    for gpu in rendered['dom']['gpus']:
        if not gpu['totalSlices']:
            assert [b['state'] for b in gpu['blocks']] in (['no-mig'], ['mig-disabled'])
            continue
        slice_width = gpu['inner']['width'] / float(gpu['totalSlices'])
        slice_widths.setdefault(gpu['totalSlices'], []).append(slice_width)
        covered = []
        for block in gpu['blocks']:
            where = '%s GPU %d block at %d' % (gpu['host'], gpu['gpu'], block['start'])
            assert abs(block['box']['width'] - block['size'] * slice_width) <= 1.0, where
            assert abs(block['box']['left'] - (gpu['inner']['left'] + block['start'] * slice_width)) <= 1.0, where
            covered.extend(range(block['start'], block['start'] + block['size']))
            checked += 1
        assert sorted(covered) == list(range(gpu['totalSlices'])), 'blocks must tile %s GPU %d' % (gpu['host'], gpu['gpu'])
    for count, widths in slice_widths.items():
        assert max(widths) - min(widths) <= 1.0, 'slices of %d-slice GPUs differ in width: %s' % (count, widths)
    assert set(slice_widths) == {4, 8} and checked > 20


@pytest.mark.parametrize('layout', ['dom', 'narrow_dom'])
def test_labels_stay_readable(rendered, layout):
    dom = rendered[layout]
    for gpu in dom['gpus']:
        for block in gpu['blocks']:
            where = '%s: %s GPU %d %s block at %s' % (layout, gpu['host'], gpu['gpu'], block['state'], block['start'])
            assert not block['clippedVertically'], where
            assert not block['profileClipped'], where
            assert block['title'], where
    assert dom['scrollWidth'] <= dom['viewport']
    assert dom['viewport'] == (WINDOW[0] if layout == 'dom' else NARROW_WIDTH)


def test_stranded_slices_are_marked(rendered):
    for gpu in rendered['dom']['gpus']:
        stranded = [b for b in gpu['blocks'] if b['state'] == 'stranded']
        assert [b['start'] for b in stranded] == EXPECTED_STRANDED.get((gpu['host'], gpu['gpu']), [])
        assert len(stranded) == gpu['stranded']
        for block in stranded:
            assert block['text'].strip() == 'stranded' and 'stranded' in block['title']
            assert 'repeating-linear-gradient' in block['background']
    free = [b for g in rendered['dom']['gpus'] for b in g['blocks'] if b['state'] == 'free']
    assert free and all(b['text'].strip() == 'free' and 'gradient' not in b['background'] for b in free)
    facts = dict(((h['host'], g['index']), g['stranded_slices'] or 0) for h in rendered['fleet'] for g in h['gpus'])
    assert rendered['dom']['totals']['stranded_slices'] == sum(facts.values()) == len(EXPECTED_STRANDED)


def test_busy_and_allocated_instances_are_labelled(rendered):
    blocks = dict(((g['host'], g['gpu'], b['start']), b) for g in rendered['dom']['gpus'] for b in g['blocks'])
    busy_allocated = blocks[('gpu-h100-01', 0, 0)]['text']
    assert 'busy' in busy_allocated and '1001, 1002' in busy_allocated and 'research/train-job-0' in busy_allocated
    allocated_only = blocks[('gpu-a100-01', 0, 6)]
    assert 'allocated' in allocated_only['text'] and 'busy' not in allocated_only['text']
    assert 'ml-serving/llm-small-7f9c (container server)' in allocated_only['title']
    assert 'idle' in blocks[('gpu-a100-01', 0, 4)]['text']
    assert 'batch/etl-17' in blocks[('gpu-h200-01', 0, 4)]['text']   # a pod as nvidia_mig_facts names it
    whole_gpu = [g for g in rendered['dom']['gpus'] if g['host'] == 'inference-l40s-01'][0]['blocks'][0]
    assert 'allocated to inference/vllm-0' in whole_gpu['text']


def test_page_loads_nothing_from_the_network(rendered):
    assert rendered['requests'] == [rendered['url']]


def test_request_log_would_catch_an_external_resource(rendered):
    """The check above can fail: a page that refers to the network shows those requests."""
    assert rendered['probe_requests'][0] == rendered['probe_url']
    assert set(rendered['probe_requests'][1:]) == {'https://fleet-map-probe.invalid/style.css',
                                                   'http://fleet-map-probe.invalid/pixel.png'}


def _png_pixels(data):
    """(width, height, channels, decompressed scanlines) of a PNG, checking its structure."""
    assert data[:8] == b'\x89PNG\r\n\x1a\n', 'not a PNG signature'
    position = 8
    chunks = []
    while position < len(data):
        length, kind = struct.unpack('>I4s', data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        crc = struct.unpack('>I', data[position + 8 + length:position + 12 + length])[0]
        assert zlib.crc32(kind + body) & 0xffffffff == crc, 'bad CRC in chunk %r' % kind
        chunks.append((kind, body))
        position += 12 + length
    assert chunks[0][0] == b'IHDR' and chunks[-1][0] == b'IEND'
    width, height, depth, colour = struct.unpack('>IIBB', chunks[0][1][:10])
    assert depth == 8 and colour in (2, 6)
    pixels = zlib.decompress(b''.join(body for kind, body in chunks if kind == b'IDAT'))
    return width, height, 3 if colour == 2 else 4, pixels


def test_screenshot_is_a_full_page_png(rendered):
    width, height, channels, pixels = _png_pixels(rendered['screenshot'])
    assert width == WINDOW[0] and height > WINDOW[1], 'a full-page capture is taller than the window'
    assert len(pixels) == height * (1 + width * channels)
    rows = set(pixels[row * (1 + width * channels):(row + 1) * (1 + width * channels)] for row in range(height))
    assert len(rows) > height // 4, 'the screenshot is mostly blank'
    assert os.path.getsize(os.path.join(ARTIFACTS, 'fleet-map.png')) == len(rendered['screenshot'])
