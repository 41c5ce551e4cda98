import CrashHarness
import Foundation

/// The end of the demo's output: one row per upload, then the tally and the verdict.
///
///     upload  behaviour        launches  attempts  retries (counted/not)  result
///          0  succeeds                1         1  0/0                    completed
///          5  refused                 2         1  0/0                    failed: 403 upload refused
///
///     Tally (from the effects journal and the store, after 3 launches and 2 SIGKILLs):
///       completed:   17
///       failed:       3  in the failed area with reason "403 upload refused"
///       lost:         0
///       ran twice:    1  upload 7 (completed, then killed before its record was removed)
///       started again after completion: 0
///       dependents started before their prerequisites succeeded: 0
///       batches partly restored: 0
struct DemoReport {
    var tally: DemoTally
    var kills: Int

    var text: String {
        var lines = ["upload  behaviour        launches  attempts  retries (counted/not)  result"]
        for upload in tally.uploads {
            let behaviour: String = UploadBehaviour.forIndex(upload.index).rawValue
            let retries: String = "\(upload.countedRetries)/\(upload.uncountedRetries)"
            let columns: [String] = [
                String(upload.index).leftPadded(to: 6), behaviour.rightPadded(to: 15),
                String(upload.launches.count).leftPadded(to: 8), String(upload.attempts).leftPadded(to: 8),
                retries.rightPadded(to: 21), upload.result,
            ]
            lines.append(columns.joined(separator: "  "))
        }
        lines += albumRows
        lines.append("")
        lines.append("Tally (from the effects journal and the store, after \(tally.launches) launches and \(kills) SIGKILLs):")
        lines.append(row("completed", tally.completed.count))
        let reasons: [String] = Dictionary(grouping: tally.failed, by: \.failureGroup)
            .sorted { $0.key < $1.key }
            .map { (reason: String, uploads: [DemoTally.Upload]) -> String in
                uploads.count > 1 ? "\"\(reason)\" x\(uploads.count)" : "\"\(reason)\""
            }
        lines.append(row("failed", tally.failed.count, reasons.isEmpty ? "" : "in the failed area with reason " + reasons.joined(separator: ", ")))
        lines.append(row("lost", tally.lost.count, tally.lost.isEmpty ? "" : Timeline.names(tally.lost.map(\.index))))
        lines.append(row("ran twice", tally.ranTwice.count, tally.ranTwice.isEmpty ? "" :
            "\(Timeline.names(tally.ranTwice)) (completed, then killed before the record was removed: at-least-once)"))
        let startedAgain = tally.violations.filter { $0.contains("started again") }.count
        lines.append("  started again after completion: \(startedAgain)")
        if !tally.graphNodes.isEmpty {
            lines.append("  dependents started before their prerequisites succeeded: \(tally.startsBeforePrerequisites)")
            lines.append("  batches partly restored: \(tally.partlyRestoredBatches)")
        }
        for violation in tally.violations where !violation.contains("started again") {
            lines.append("  problem: \(violation)")
        }
        lines.append("")
        lines.append(tally.isSuccessful
            ? "OK: every acknowledged upload completed or failed for good; nothing was lost, nothing completed ran again."
            : "FAILED: the at-least-once contract did not hold (see above).")
        return lines.joined(separator: "\n")
    }

    /// One row per album: how it was added and each node's result (attempts in parentheses).
    ///
    ///     album  added with            create      photo 1     photo 2     photo 3     publish
    ///         2  one addOperations     done (3)    done (1)    refused     done (3)    failed: photo 2
    private var albumRows: [String] {
        guard !tally.graphNodes.isEmpty else { return [] }
        let headers = AlbumGraph.roles.map { AlbumGraph.roleName($0).rightPadded(to: cellWidth) }
        var lines = ["", (["album", "added with          "] + headers).joined(separator: "  ").trimmingTrailingSpaces]
        let albums = Dictionary(grouping: tally.graphNodes) { AlbumGraph.node(of: $0.index)?.album ?? -1 }
        for number in albums.keys.sorted() {
            let album = DemoAlbum(number: number)
            let cells = albums[number]!.map { cell($0, in: album) }
            let addedAs = album.isAddedAsBatch ? "one addOperations" : "\(cells.count) addOperation calls"
            lines.append(([String(number).leftPadded(to: 5), addedAs.rightPadded(to: 20)] + cells).joined(separator: "  ").trimmingTrailingSpaces)
        }
        return lines
    }

    private var cellWidth: Int { 10 }

    private func cell(_ node: DemoTally.Upload, in album: DemoAlbum) -> String {
        let text: String
        if node.isCompleted {
            text = "done (\(node.attempts))"
        } else if let prerequisite = node.failedPrerequisite ?? (node.wasSkipped ? -1 : nil) {
            let role = AlbumGraph.node(of: prerequisite).map { AlbumGraph.roleName($0.role) }
            text = node.wasSkipped ? "not added" : "failed: \(role ?? "?")"
        } else if node.failureReason != nil {
            text = AlbumGraph.node(of: node.index).map { album.behaviour(of: $0.role) } == .refused ? "refused" : "failed"
        } else {
            text = "LOST"
        }
        return text.rightPadded(to: cellWidth)
    }

    private func row(_ name: String, _ value: Int, _ note: String = "") -> String {
        ("  " + name + ":").rightPadded(to: 13) + String(value).leftPadded(to: 4) + (note.isEmpty ? "" : "  " + note)
    }
}

extension String {
    /// The string without spaces at its end.
    var trimmingTrailingSpaces: String {
        var text = self
        while text.last == " " { text.removeLast() }
        return text
    }
}
