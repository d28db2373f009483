"""The self-learning gateway (seed 001): unknown URLs are queued, crawled, classified by
their content, and the verdicts enforced through a small overlay snapshot.

Data flow, one direction only::

    gateway --unknown URL--> queue --> crawler --> WARC spool --> classifier --> learned lists
       ^                                                                              |
       +------------------------------ overlay snapshot (atomic swap) <---------------+

The gateway never imports this package: the command line hands it an ``on_unknown``
callable. Everything here needs the ``learn`` extra (``pip install 'urlsieve[learn]'``).
"""
