# JupyterLab server settings for `make lab` (and the tests and benchmarks that start JupyterLab
# the same way): passed with --config, so a reader's own Jupyter configuration is left alone.
#
# The kernel's replies reach the browser over a websocket that Jupyter Server leaves with
# Nagle's algorithm on: a widget's reply (several small messages in a row) then waits for the
# browser's delayed acknowledgement. Turning it off took 15 to 25 ms off the median round trip
# of a widget's model-bound control here (benchmarks/widget_browser.py, issue 20).
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection


class NoDelayWebsocketConnection(ZMQChannelsWebsocketConnection):
    """The standard kernel websocket connection, sending each message at once (TCP_NODELAY)."""

    def connect(self):
        self.websocket_handler.set_nodelay(True)
        return super().connect()


c = get_config()  # noqa: F821 (defined by Jupyter when it reads this file)
c.ServerApp.kernel_websocket_connection_class = NoDelayWebsocketConnection
