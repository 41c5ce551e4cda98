extension Int {
    /// `100000` as `100,000`.
    var groupedDigits: String {
        let digits = String(self.magnitude)
        var groups: [Substring] = []
        var end = digits.endIndex
        while end > digits.startIndex {
            let start = digits.index(end, offsetBy: -3, limitedBy: digits.startIndex) ?? digits.startIndex
            groups.insert(digits[start..<end], at: 0)
            end = start
        }
        return (self < 0 ? "-" : "") + groups.joined(separator: ",")
    }
}
