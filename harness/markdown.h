// The Markdown that reports write, and its conversion to HTML for the report pages.
#pragma once
#include <functional>
#include <string>

namespace topt {

// Text safe inside a pipe-table cell: '|' escaped, newlines folded.
std::string md_cell(const std::string& s);
std::string html_escape(const std::string& s);

// The subset reports use: ATX headings, pipe tables, "- " lists, paragraphs, images, links, `code`,
// **bold**; lines starting with '<' (<details>, comments) pass through. `image_src` maps an image's
// path to what its <img src> gets (a data: URI, for a page that stands alone).
std::string markdown_to_html(const std::string& md, const std::function<std::string(const std::string&)>& image_src);

}  // namespace topt
