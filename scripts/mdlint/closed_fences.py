"""
closed_fences.py - a PyMarkdown rule (make mdlint): every fenced code block is closed by its own fence.

A fence left open runs to the end of the document (or of the list item or quote it is in): everything after it
renders as code. CommonMark closes it silently, so no built-in rule reports it; the parser marks the block's end
as forced, and this rule reports the opening fence's line.
"""

from pymarkdown.plugin_manager.plugin_details import PluginDetails
from pymarkdown.plugin_manager.plugin_scan_context import PluginScanContext
from pymarkdown.plugin_manager.rule_plugin import RulePlugin
from pymarkdown.tokens.markdown_token import MarkdownToken


class ClosedFences(RulePlugin):
    """A fenced code block whose end was not its closing fence."""

    def __init__(self) -> None:
        super().__init__()
        self.__open = []

    def get_details(self) -> PluginDetails:
        return PluginDetails(
            plugin_name="closed-fences",
            plugin_id="OOM001",
            plugin_enabled_by_default=True,
            plugin_description="Fenced code blocks must be closed by a fence",
            plugin_version="0.1.0",
            plugin_interface_version=1,
            plugin_url="https://spec.commonmark.org/0.31.2/#fenced-code-blocks",
        )

    def starting_new_file(self) -> None:
        self.__open = []

    def next_token(self, context: PluginScanContext, token: MarkdownToken) -> None:
        if token.is_fenced_code_block:
            self.__open.append(token)
        elif token.is_fenced_code_block_end:
            start = self.__open.pop() if self.__open else None
            if start is not None and token.was_forced:
                self.report_next_token_error(context, start)
