"""Integrations with other tools; each module imports its tool, so import the one you use.

* :mod:`urlsieve.integrations.scrapy` — duplicate filter and request fingerprinter
  (``pip install 'urlsieve[scrapy]'``).
"""
