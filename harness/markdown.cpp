#include "harness/markdown.h"

#include <sstream>
#include <vector>

namespace topt {

std::string md_cell(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '|') out += "\\|";
    else if (ch == '\n') out += ' ';
    else out += ch;
  }
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

namespace {

using ImageSrc = std::function<std::string(const std::string&)>;

// Index of the ']' closing the '[' at `open`, then of the ')' closing the link target, or npos.
bool link_at(const std::string& s, size_t open, size_t& close_text, size_t& close_target) {
  close_text = s.find("](", open);
  if (close_text == std::string::npos) return false;
  close_target = s.find(')', close_text + 2);
  return close_target != std::string::npos;
}

std::string inline_html(const std::string& s, const ImageSrc& image_src) {
  std::string out;
  bool bold = false;
  for (size_t i = 0; i < s.size(); ++i) {
    size_t text_end = 0, target_end = 0;
    if (s[i] == '\\' && i + 1 < s.size() && s[i + 1] == '|') {
      out += '|';
      ++i;
    } else if (s[i] == '`' && s.find('`', i + 1) != std::string::npos) {
      size_t end = s.find('`', i + 1);
      out += "<code>" + html_escape(s.substr(i + 1, end - i - 1)) + "</code>";
      i = end;
    } else if (s.compare(i, 2, "**") == 0) {
      out += bold ? "</strong>" : "<strong>";
      bold = !bold;
      ++i;
    } else if (s.compare(i, 2, "![") == 0 && link_at(s, i + 2, text_end, target_end)) {
      std::string alt = s.substr(i + 2, text_end - i - 2), src = s.substr(text_end + 2, target_end - text_end - 2);
      out += "<img alt=\"" + html_escape(alt) + "\" src=\"" + html_escape(image_src(src)) + "\">";
      i = target_end;
    } else if (s[i] == '[' && link_at(s, i + 1, text_end, target_end)) {
      std::string text = s.substr(i + 1, text_end - i - 1), href = s.substr(text_end + 2, target_end - text_end - 2);
      out += "<a href=\"" + html_escape(href) + "\">" + inline_html(text, image_src) + "</a>";
      i = target_end;
    } else {
      out += html_escape(std::string(1, s[i]));
    }
  }
  if (bold) out += "</strong>";
  return out;
}

bool is_table_row(const std::string& line) { return line.size() > 1 && line.front() == '|'; }

// Cells of "| a | b \| c |": split on unescaped pipes, trimmed.
std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += "\\|";
      ++i;
    } else if (line[i] == '|') {
      cells.push_back(cell);
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  for (auto& c : cells) {
    size_t b = c.find_first_not_of(' '), e = c.find_last_not_of(' ');
    c = b == std::string::npos ? "" : c.substr(b, e - b + 1);
  }
  return cells;
}

std::string table_html(const std::vector<std::string>& lines, const ImageSrc& image_src) {
  std::vector<std::string> align;
  for (const std::string& c : table_cells(lines[1])) {
    bool left = !c.empty() && c.front() == ':', right = !c.empty() && c.back() == ':';
    align.push_back(left && right ? "center" : right ? "right" : left ? "left" : "");
  }
  auto row = [&](const std::string& line, const char* tag) {
    std::string out = "<tr>";
    auto cells = table_cells(line);
    for (size_t i = 0; i < cells.size(); ++i) {
      std::string style = i < align.size() && !align[i].empty() ? " style=\"text-align:" + align[i] + "\"" : "";
      out += std::string("<") + tag + style + ">" + inline_html(cells[i], image_src) + "</" + tag + ">";
    }
    return out + "</tr>\n";
  };
  std::string out = "<table>\n<thead>" + row(lines[0], "th") + "</thead>\n<tbody>\n";
  for (size_t i = 2; i < lines.size(); ++i) out += row(lines[i], "td");
  return out + "</tbody>\n</table>\n";
}

}  // namespace

std::string markdown_to_html(const std::string& md, const ImageSrc& image_src) {
  std::vector<std::string> lines;
  std::istringstream in(md);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string out, paragraph;
  auto flush_paragraph = [&] {
    if (!paragraph.empty()) out += "<p>" + inline_html(paragraph, image_src) + "</p>\n";
    paragraph.clear();
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.empty()) {
      flush_paragraph();
    } else if (line[0] == '#') {
      flush_paragraph();
      size_t level = line.find_first_not_of('#');
      if (level == std::string::npos || level > 6 || line[level] != ' ') {
        paragraph = line;
        continue;
      }
      out += "<h" + std::to_string(level) + ">" + inline_html(line.substr(level + 1), image_src) + "</h" +
             std::to_string(level) + ">\n";
    } else if (is_table_row(line) && i + 1 < lines.size() && is_table_row(lines[i + 1]) &&
               lines[i + 1].find("---") != std::string::npos) {
      flush_paragraph();
      std::vector<std::string> table;
      while (i < lines.size() && is_table_row(lines[i])) table.push_back(lines[i++]);
      --i;
      out += table_html(table, image_src);
    } else if (line.compare(0, 2, "- ") == 0) {
      flush_paragraph();
      out += "<ul>\n";
      for (; i < lines.size() && lines[i].compare(0, 2, "- ") == 0; ++i)
        out += "<li>" + inline_html(lines[i].substr(2), image_src) + "</li>\n";
      --i;
      out += "</ul>\n";
    } else if (line[0] == '<') {
      flush_paragraph();
      out += line + "\n";
    } else {
      if (!paragraph.empty()) paragraph += ' ';
      paragraph += line;
    }
  }
  flush_paragraph();
  return out;
}

}  // namespace topt
