//! Thirty fake secrets in real formats (none valid: random characters in the
//! shapes providers issue), each in the kind of line it is found in.

/// `(line with `{}` where the secret goes, secret)`.
pub const FAKE_SECRETS: [(&str, &str); 30] = [
    ("aws_access_key_id = {}", "AKIANACKPBDJXPHV5WRZ"),
    ("AWS_ACCESS_KEY_ID={}", "ASIAQWONWUOT2O527F5X"),
    (
        "aws_secret_access_key = \"{}\"",
        "4O5Zi/czrwcK+tmoYgj7LZDwTkENNvOX8R4jI8so",
    ),
    (
        "GITHUB_TOKEN={}",
        "ghp_RFyya1q79VfsecC5d8qk0FKE3FcGdE1fK9Do",
    ),
    ("token: {}", "gho_XWLCSUqRfNadvWP1yBwdN7TtMCtJ0bZB535y"),
    (
        "GH_PAT = \"{}\"",
        "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",
    ),
    ("gitlab_token = \"{}\"", "glpat-NWuxzoJPHOhHUDLk1TRX"),
    (
        "SLACK_BOT_TOKEN={}",
        "xoxb-57996045245-207931143178-k44oukN34dxAoAV4kxWKjGlE",
    ),
    (
        "stripe.api_key = \"{}\"",
        "sk_live_E6DDMkBeBr7CVpQ8bCvz5Pkc",
    ),
    (
        "const STRIPE: &str = \"{}\";",
        "rk_live_QLaNRDCbvC4DMYqyDZCzSOGW",
    ),
    (
        "GOOGLE_API_KEY={}",
        "AIzapvO59Q7kBCvZnZQP5GwI1pMCIuHLt5Et9pF",
    ),
    (
        "OPENAI_API_KEY={}",
        "sk-proj-BY2CK08Z8CPWTRWQQmq_CDjwNGBE_G_xE-VuBQofHhCeTYQL",
    ),
    (
        "openai.api_key = \"{}\"",
        "sk-LOL6uuxAPJ7OyWa62E4V1KOoASeQ6kBihdNfcOyVMIZBwjmI",
    ),
    (
        "ANTHROPIC_API_KEY={}",
        "sk-ant-api03-SlrgSHg4dsa49CsvXEC2Q_gpxYKOnItbFG4sYKjWCg_SvwzonLVxEqL3r9FcreV2k9QvUh6h-QvEZU4YUWisJEpmiBZAOAA",
    ),
    (
        "OPENROUTER_API_KEY={}",
        "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",
    ),
    ("HF_TOKEN={}", "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"),
    (
        "//registry.npmjs.org/:_authToken={}",
        "npm_q53nTmBs6iGpjN8aVuLXZGX5di7aIqj82fJW",
    ),
    (
        "SENDGRID_API_KEY={}",
        "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",
    ),
    (
        "Authorization: Bearer {}",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIbzxY27UZc4YC9oRqJOEQIn0.2y6PCEksBORYfw9n8Ow6dbDqI0EuHjxq1sndWOEcb6g",
    ),
    (
        "DATABASE_URL=postgres://app:{}@db.internal:5432/app",
        "7cBVGDiFwRKZ9rZ95t",
    ),
    (
        "let url = \"mysql://root:{}@localhost/shop\";",
        "G3reecqMfVOpeJ",
    ),
    (
        "MONGO_URI=mongodb+srv://svc:{}@cluster0.example.net/prod",
        "7c7r5eTTaqCXl4o2EO2r",
    ),
    (
        "REDIS_URL=redis://default:{}@cache:6379",
        "PVkwKf4Z64yGiooOlqwzqLTU",
    ),
    ("DB_PASSWORD={}", "4VHgXzFGRtrexqgB"),
    (
        "SECRET_KEY = \"{}\"",
        "3xAZ=uAqKQ2N#c7ZDIc6%(bb61i!Fawhs57Ao*Uc9yBgTB2yhh",
    ),
    ("AUTH_TOKEN: \"{}\"", "7d446d687e420c0189632fa4db13fc75"),
    (
        "\"client_secret\": \"{}\",",
        "FD9GLFfojFCJpm37WXwiHluMHYgYF8FWRYNDJoTy",
    ),
    (
        "DefaultEndpointsProtocol=https;AccountName=store;{};EndpointSuffix=core.windows.net",
        "AccountKey=Y9m/LbWpQRYYnhfaMI0xzHfC8Ul5LdqDJqSlQNAzXu4JdeDiHVm3gN5wIBCTpIGCRX2QjMyeOGmaPrwUrqaIkr==",
    ),
    ("api_key: {}", "V22huY9jJBKMsfFI3O1AEVIIcc4Xiqjt"),
    (
        "{}",
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACBq9vTz2Hc1Qe8RkF0XyB7mW3pL5nJ4sD6aG2hK8tV1cAAAAJgT1eN0E9Xz\n-----END OPENSSH PRIVATE KEY-----",
    ),
];

/// A config file holding every secret, one per line.
pub fn document() -> String {
    FAKE_SECRETS
        .iter()
        .map(|(line, secret)| line.replace("{}", secret))
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// What of each secret must not leave: the whole value, or for a
/// private key its body.
pub fn tell_tales() -> Vec<&'static str> {
    FAKE_SECRETS
        .iter()
        .map(|(_, secret)| secret.lines().nth(1).unwrap_or(secret))
        .collect()
}
