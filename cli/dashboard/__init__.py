"""The web dashboard: servers, ranges, events and a key-space heatmap of a running cluster.

``heatmap.py`` is the pure model, ``state.py`` what the poller keeps, ``server.py`` the HTTP
server, ``page.html`` the page, ``command.py`` the ``rangetable dashboard`` command.
"""
