/// A table of text aligned in columns, for the inspector's human output.
///
/// ```swift
/// var table = TextTable(headers: ["ID", "TYPE"])
/// table.append(["A1", "upload"])
/// print(table.rendered())
/// // ID  TYPE
/// // A1  upload
/// ```
struct TextTable {
    let headers: [String]
    private(set) var rows: [[String]] = []

    init(headers: [String]) {
        self.headers = headers
    }

    /// Adds a row; it must have one cell per header.
    mutating func append(_ row: [String]) {
        precondition(row.count == headers.count, "a row needs one cell per column")
        rows.append(row)
    }

    /// The table, columns separated by two spaces, the last column not padded.
    func rendered() -> String {
        let all = [headers] + rows
        let widths = headers.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { row in
            row.enumerated().map { column, cell in
                column == row.count - 1 ? cell : cell + String(repeating: " ", count: widths[column] - cell.count)
            }.joined(separator: "  ")
        }.joined(separator: "\n")
    }
}
