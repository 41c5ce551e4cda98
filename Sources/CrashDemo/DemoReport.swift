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
        lines.append("")
        lines.append("Tally (from the effects journal and the store, after \(tally.launches) launches and \(kills) SIGKILLs):")
        lines.append(row("completed", tally.completed.count))
        let reasons: [String] = Dictionary(grouping: tally.failed, by: { $0.failureReason ?? "" })
            .sorted { $0.key < $1.key }
            .map { (reason: String, uploads: [DemoTally.Upload]) -> String in
                uploads.count > 1 ? "\"\(reason)\" x\(uploads.count)" : "\"\(reason)\""
            }
        lines.append(row("failed", tally.failed.count, reasons.isEmpty ? "" : "in the failed area with reason " + reasons.joined(separator: ", ")))
        lines.append(row("lost", tally.lost.count, tally.lost.isEmpty ? "" : "uploads " + Timeline.ranges(tally.lost.map(\.index))))
        lines.append(row("ran twice", tally.ranTwice.count, tally.ranTwice.isEmpty ? "" :
            "\(tally.ranTwice.count == 1 ? "upload" : "uploads") \(Timeline.ranges(tally.ranTwice)) (completed, then killed before the record was removed: at-least-once)"))
        let startedAgain = tally.violations.filter { $0.contains("started again") }.count
        lines.append("  started again after completion: \(startedAgain)")
        for violation in tally.violations where !violation.contains("started again") {
            lines.append("  problem: \(violation)")
        }
        lines.append("")
        lines.append(tally.isSuccessful
            ? "OK: every acknowledged upload completed or failed for good; nothing was lost, nothing completed ran again."
            : "FAILED: the at-least-once contract did not hold (see above).")
        return lines.joined(separator: "\n")
    }

    private func row(_ name: String, _ value: Int, _ note: String = "") -> String {
        ("  " + name + ":").rightPadded(to: 13) + String(value).leftPadded(to: 4) + (note.isEmpty ? "" : "  " + note)
    }
}
